"""A made-up run summary for the claims and page tests: the fields `claims` and the pages read."""


def fake_run(mae, rmse, ause, auroc, auroc_bins, c0_dist, c0_clean):
  return {"metrics": {"mae": mae, "rmse": rmse}, "uncertainty": {"ause_pncnn": ause},
          "c0": {"auroc": auroc, "auroc_depth_bins": auroc_bins, "c0_mean_disturbed": c0_dist,
                 "c0_mean_clean": c0_clean}}

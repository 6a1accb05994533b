"""The sparse optical-flow experiment (docs/results/RESULTS_FLOW.md): its runs, baselines and page."""

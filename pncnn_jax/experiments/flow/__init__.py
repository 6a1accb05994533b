"""The sparse optical-flow experiment (docs/RESULTS_FLOW.md): its runs, baselines and page."""

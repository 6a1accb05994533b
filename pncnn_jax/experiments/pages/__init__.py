"""The results pages (docs/results/RESULTS*.md): tables, figures and the sentences that state each claim's verdict;
and the front figure of the README and the docs home (`front_figure`: the real KITTI frame at 64 and 16 beams)."""

"""The results pages (docs/results/RESULTS*.md): tables, figures and the sentences that state each claim's verdict."""

"""The results pages (docs/RESULTS*.md): tables, figures and the sentences that state each claim's verdict."""

"""Infrastructure every package builds on, importing none of them: config parsing and one-line errors for the
entry points, atomic writes, checkpoint loading, the Hub layout and model cards, provenance, crash points and
data-parallel training."""

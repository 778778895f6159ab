"""The co-evolution loop: its configuration and bookkeeping (`config`), the stages it runs (`run`) and
the report of a finished run (`report`)."""

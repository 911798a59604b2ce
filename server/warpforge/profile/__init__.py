"""Analysis: ptxas + SASS + source patterns (static), Nsight Compute (profile) → findings at lines."""

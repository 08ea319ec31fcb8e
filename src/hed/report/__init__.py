"""Figures and pages: Figure 2 and 3, dynamics and rescoring figures, the token report."""

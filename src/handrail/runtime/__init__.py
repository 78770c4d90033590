"""The run loop: events, the fold, the pause/resume rules, effects and their drivers."""

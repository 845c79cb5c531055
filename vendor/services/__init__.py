"""The vendor app's service layer: every write to questions, answers, artifacts, uploads, organisations and
tokens goes through these functions, whichever entry point (API, browser, admin, command) asks."""

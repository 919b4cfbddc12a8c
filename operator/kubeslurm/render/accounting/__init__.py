"""slurmdbd: its StatefulSet and the Services it is reached by."""

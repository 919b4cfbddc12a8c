"""slurmctld: its StatefulSet, its state claim and the Services it is reached by."""

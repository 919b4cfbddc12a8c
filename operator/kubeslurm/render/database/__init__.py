"""The internal MariaDB: its StatefulSet, data claim, network policy and Services."""

import sys

from testbed.local_cluster.cli import main

sys.exit(main())

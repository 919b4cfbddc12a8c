import sys

from e2e.cluster.local_cluster import main

sys.exit(main())

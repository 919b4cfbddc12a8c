import sys

from testbed.local_cluster.fake_gpu.plugin import main

sys.exit(main())

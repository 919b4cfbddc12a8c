import sys

from e2e.cluster.fake_gpu.plugin import main

sys.exit(main())

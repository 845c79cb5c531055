import sys

from npu_sim.cli import main

sys.exit(main())

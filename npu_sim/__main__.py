import os
import sys

# The simulator's matrices are small: one BLAS thread does them faster than several, and a runner on a
# shared host should not spread over cores it was not given. Set before numpy is first imported.
for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(variable, "1")

from npu_sim.cli import main  # noqa: E402

sys.exit(main())

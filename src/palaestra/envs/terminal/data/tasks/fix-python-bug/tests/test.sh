#!/bin/sh
set -e
python3 -I -c "
import sys; sys.path.insert(0, '.')
from stats import mean
assert mean([1, 2, 3]) == 2
assert mean([5]) == 5
assert abs(mean([0.5, 1.5]) - 1.0) < 1e-9
"

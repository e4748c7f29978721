#!/bin/sh
set -e
[ -x tools/run.sh ] && [ "$(./tools/run.sh)" = "ok" ]

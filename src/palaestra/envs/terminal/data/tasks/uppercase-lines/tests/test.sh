#!/bin/sh
set -e
printf 'ALICE\nBOB\nCAROL SMITH\n' > "${TMPDIR:-/tmp}/expected"
cmp -s upper.txt "${TMPDIR:-/tmp}/expected"

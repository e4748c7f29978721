#!/bin/sh
set -e
printf -- '-3\n0\n7\n8\n15\n42\n100\n' > "${TMPDIR:-/tmp}/expected"
cmp -s sorted.txt "${TMPDIR:-/tmp}/expected"

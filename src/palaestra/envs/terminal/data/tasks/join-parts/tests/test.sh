#!/bin/sh
set -e
printf 'alpha\nbeta\ngamma\n' > "${TMPDIR:-/tmp}/expected"
cmp -s full.txt "${TMPDIR:-/tmp}/expected"

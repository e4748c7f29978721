#!/bin/sh
set -e
printf 'ana\nbo\ncy\ndee\n' > "${TMPDIR:-/tmp}/expected"
cmp -s unique.txt "${TMPDIR:-/tmp}/expected"

#!/bin/sh
set -e
tar -tzf backup.tar.gz > "${TMPDIR:-/tmp}/list"
grep -q '^data/a.csv$' "${TMPDIR:-/tmp}/list" && grep -q '^data/sub/b.txt$' "${TMPDIR:-/tmp}/list"

#!/bin/sh
set -e
printf 'APP_ENV=production\nPORT=8080\nDEBUG=false\n' > "${TMPDIR:-/tmp}/expected"
cmp -s .env "${TMPDIR:-/tmp}/expected"

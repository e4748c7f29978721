#!/bin/sh
set -e
printf 'ERROR disk full\nERROR timeout on db\nERROR retry failed\n' > "${TMPDIR:-/tmp}/expected"
cmp -s errors.txt "${TMPDIR:-/tmp}/expected"
[ "$(tr -d ' \n' < error_count.txt)" = "3" ]

#!/bin/sh
set -e
grep -q colour report.txt && exit 1
[ "$(grep -o color report.txt | wc -l | tr -d ' ')" = "3" ]
grep -q 'No change.' report.txt

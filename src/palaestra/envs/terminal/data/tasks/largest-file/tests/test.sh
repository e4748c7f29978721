#!/bin/sh
set -e
[ "$(tr -d '\n' < largest.txt)" = "b.bin" ]

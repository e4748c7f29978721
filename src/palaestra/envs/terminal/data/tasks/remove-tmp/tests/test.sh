#!/bin/sh
set -e
[ -z "$(find . -name '*.tmp')" ]
[ -f keep.txt ] && [ -f deep/keep.md ]

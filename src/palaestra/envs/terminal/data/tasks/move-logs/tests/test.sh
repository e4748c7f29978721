#!/bin/sh
set -e
[ -f logs/a.log ] && [ -f logs/b.log ] && [ ! -e a.log ] && [ ! -e b.log ] || exit 1
[ -f keep.txt ] && [ -f sub/c.log ] && [ ! -e logs/c.log ]

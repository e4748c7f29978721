#!/bin/sh
set -e
[ -d src/app ] && [ -d tests ] && [ -d docs ] && [ -f src/app/__init__.py ] && [ ! -s src/app/__init__.py ]

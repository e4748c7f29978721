#!/bin/sh
set -e
[ "$(tr -d ' \n' < py_count.txt)" = "3" ]

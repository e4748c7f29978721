#!/bin/sh
set -e
[ "$(tr -d ' \n' < count.txt)" = "137" ]

#!/bin/sh
set -e
[ "$(tr -d ' \n' < total.txt)" = "500" ]

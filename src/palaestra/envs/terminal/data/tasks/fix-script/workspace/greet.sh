#!/bin/sh
name=$1
echo "Hello, $nme!"

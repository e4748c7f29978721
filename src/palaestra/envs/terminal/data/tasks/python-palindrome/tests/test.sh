#!/bin/sh
set -e
python3 -I -c "
import sys; sys.path.insert(0, '.')
from solution import is_palindrome
assert is_palindrome('A man, a plan, a canal: Panama')
assert is_palindrome('')
assert not is_palindrome('palaestra')
assert is_palindrome('No lemon, no melon')
"

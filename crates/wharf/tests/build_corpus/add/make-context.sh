#!/bin/sh
# Archives for ADD to extract, made in the build context (git keeps no tar files here).
set -e
tar --owner=3 --group=4 --mtime=@1700000000 -C tree -cf a.tar .
tar --owner=0 --group=0 --mtime=@1700000000 -C tree -czf b.tar.gz t.txt inner
tar --owner=0 --group=0 --mtime=@1700000000 -C tree -cjf c.tar.bz2 t.txt
tar --owner=0 --group=0 --mtime=@1700000000 -C tree -cJf d.tar.xz inner

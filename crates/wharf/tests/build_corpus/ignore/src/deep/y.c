src/deep/y.c

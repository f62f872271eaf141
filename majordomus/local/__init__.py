"""What runs majordomus's servers on this machine, for development and tests: the embedded
Redis of `majordomus dev` and of the suite (`embedded`), a local Redis Cluster of three
masters (`cluster`), and the record by which a running `dev` is found (`dev_record`). It
starts processes; the store, below it, speaks to whatever Redis it is given and starts
none.
"""

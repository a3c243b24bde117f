//! drover runtime-real: the thin real runtime binding core-fsm to real I/O.

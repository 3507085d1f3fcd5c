/*
 * attach_client.h — `tdbg attach`: the front end's side of attaching to a
 * running job (attach_client.c; docs/attach.md).
 */
#ifndef TDBG_ATTACH_CLIENT_H
#define TDBG_ATTACH_CLIENT_H

/* `tdbg attach TARGET [options]`: argv[0] is "attach". Returns the exit
 * status: 0 after a detach, 1 when the run ended (after a stop, as a
 * launched session), 2 for trouble (cannot connect, refused, lost). */
int tdbg_attach_main(int argc, char **argv);

#endif

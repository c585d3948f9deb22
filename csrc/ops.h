/* The registry's view of the ops: one `opc_op_<Name>` entry per line of ops.def, each defined in its op's own
 * C file with OPC_DEFINE_OP (call.h). Included by api.c only: op files depend on call.h, never on this. */
#ifndef OPC_OPS_H
#define OPC_OPS_H
#include "call.h"

#define OPC_OP(NAME, SOURCE) extern const opc_op_entry opc_op_##NAME;
#include "ops.def"
#undef OPC_OP
#endif

/* prepare / check / exec entry points of every op (see internal.h for the contract). */
#ifndef OPC_OPS_H
#define OPC_OPS_H
#include "internal.h"

int32_t opc_prep_relu(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_prep_sigmoid(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_prep_tanh(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_prep_quickgelu(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_prep_leakyrelu(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_prep_gelu(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_prep_fastgelu(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_prep_biasgelu(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_prep_biasfastgelu(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_exec_ew(opc_call *c, const void *plan, opc_tensor *outs);

int32_t opc_prep_softmax(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_prep_softmax13(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_prep_logsoftmax(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_prep_logsoftmax13(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_exec_softmax(opc_call *c, const void *plan, opc_tensor *outs);

int32_t opc_prep_conv(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_exec_conv(opc_call *c, const void *plan, opc_tensor *outs);

int32_t opc_prep_gru_train(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_exec_gru_train(opc_call *c, const void *plan, opc_tensor *outs);
int32_t opc_prep_gru_grad(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_exec_gru_grad(opc_call *c, const void *plan, opc_tensor *outs);
int32_t opc_prep_lstm_train(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_exec_lstm_train(opc_call *c, const void *plan, opc_tensor *outs);
int32_t opc_prep_lstm_grad(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_exec_lstm_grad(opc_call *c, const void *plan, opc_tensor *outs);

int32_t opc_prep_layernorm_grad(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_prep_rmsnorm_grad(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_exec_layernorm_grad(opc_call *c, const void *plan, opc_tensor *outs);

int32_t opc_prep_maxpool_grad(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_exec_maxpool_grad(opc_call *c, const void *plan, opc_tensor *outs);
int32_t opc_check_maxpool_grad(opc_call *c, const void *plan);
int32_t opc_prep_avgpool_grad(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_exec_avgpool_grad(opc_call *c, const void *plan, opc_tensor *outs);
int32_t opc_prep_dropout_grad(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_exec_dropout_grad(opc_call *c, const void *plan, opc_tensor *outs);
int32_t opc_prep_batchnorm_grad(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_exec_batchnorm_grad(opc_call *c, const void *plan, opc_tensor *outs);
int32_t opc_check_batchnorm_grad(opc_call *c, const void *plan);
int32_t opc_prep_sce_loss_grad(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_exec_sce_loss_grad(opc_call *c, const void *plan, opc_tensor *outs);
int32_t opc_check_sce_loss_grad(opc_call *c, const void *plan);
int32_t opc_prep_gather_grad(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_exec_gather_grad(opc_call *c, const void *plan, opc_tensor *outs);
int32_t opc_check_gather_grad(opc_call *c, const void *plan);
int32_t opc_prep_gather_elements_grad(opc_call *c, void *plan, opc_shape *outs);
int32_t opc_exec_gather_elements_grad(opc_call *c, const void *plan, opc_tensor *outs);
int32_t opc_check_gather_elements_grad(opc_call *c, const void *plan);
#endif

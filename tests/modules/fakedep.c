/* SPDX-License-Identifier: MIT */
/*
 * A dependency of mesh-needslib.so.  It is linked under a soname that no
 * file carries, so loading that module fails the way it does on a host
 * where a module's library (libibverbs, say) is not installed.
 */
int mesh_fakedep_answer(void);

int mesh_fakedep_answer(void)
{
	return 42;
}

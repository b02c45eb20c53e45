/* dkit.h — the one header a backend or an op package includes. */
#ifndef DKIT_H
#define DKIT_H

#include "dk_backend.h"
#include "dk_backend_library.h"
#include "dk_boxed.h"
#include "dk_check.h"
#include "dk_cpu_fallback.h"
#include "dk_determinism.h"
#include "dk_dlpack.h"
#include "dk_export.h"
#include "dk_init.h"
#include "dk_introspect.h"
#include "dk_keys.h"
#include "dk_op.h"
#include "dk_op_define.h"
#include "dk_profile.h"
#include "dk_registry.h"
#include "dk_status.h"
#include "dk_tensor.h"
#include "dk_tls.h"
#include "dk_value.h"

#endif /* DKIT_H */

"""Annotation keys, as HAMi and the vendor's device plugin read them (SPEC 3 and 4)."""

# Written by the webhook on admission.
TO_ALLOCATE = "hami.io/mthreads-vgpu-devices-to-allocate"
REQUEST_GPU_NUM = "mthreads.com/request-gpu-num"

# Set by users.
CARD_MODEL = "mthreads.com/card-model"
USE_CARDS = "mthreads.ai/use-gpuuuid"
NOUSE_CARDS = "mthreads.ai/nouse-gpuuuid"
NODE_POLICY = "hami.io/node-scheduler-policy"
GPU_POLICY = "hami.io/gpu-scheduler-policy"
MIRROR = "kubernetes.io/config.mirror"

# The pod annotations a scheduling decision reads: a change of one may make a pending pod fit.
DECIDING = frozenset({CARD_MODEL, USE_CARDS, NOUSE_CARDS, NODE_POLICY, GPU_POLICY})

# Set by operators on a node (docs/allocator.md, "Cordon a card" and "Instances per card").
CORDON = "hami.io/device-cordon"  # HAMi's: comma-separated card ids that take nothing new
MAX_INSTANCES = "mthreads.com/max-instances-per-card"  # the node's own maxInstancesPerCard

# Written by the extender: how many times it put the pod back in kube-scheduler's queue because
# the only room was on nodes outside kube-scheduler's node sample (docs/extender.md).
REQUEUES = "mthreads.com/extender-requeues"

# Written by the allocator when it binds a pod; nobody else may set them (SPEC 3 rule 10).
ALLOCATED = "hami.io/mthreads-vgpu-devices-allocated"
GPU_INDEX = "mthreads.com/gpu-index"
PREDICATE_NODE = "mthreads.com/predicate-node"
VGPU_NODE = "hami.io/vgpu-node"
PREDICATE_TIME = "mthreads.com/predicate-time"
VGPU_TIME = "hami.io/vgpu-time"
BIND_TIME = "hami.io/bind-time"
BIND_PHASE = "hami.io/bind-phase"

ALLOCATION_KEYS = frozenset({
    ALLOCATED, GPU_INDEX, PREDICATE_NODE, VGPU_NODE, PREDICATE_TIME, VGPU_TIME, BIND_TIME,
    BIND_PHASE,
})

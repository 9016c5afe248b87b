"""kube-scheduler extender mode: kube-scheduler places the pod, this package picks its cards."""

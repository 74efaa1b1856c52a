// Command pause is the sandbox process of a pod on the local node of `hack/local-cluster.sh up
// --kubelet` (hack/node.py): it holds the pod's namespaces, reaps the zombies re-parented to it,
// and exits 0 on SIGINT or SIGTERM. Built here because no registry is reachable for a pause image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	children := make(chan os.Signal, 16)
	signal.Notify(children, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			os.Exit(0)
		case <-children:
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}

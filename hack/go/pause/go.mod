module segment-webhook.local/hack/pause

go 1.26

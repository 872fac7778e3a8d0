#!/usr/bin/env python3
"""docker/k8s_configmap.py — copies docker/nginx.conf into the ConfigMap at
the end of docker/k8s.yaml (the block after `default.conf.template: |`), so
Kubernetes runs the very file compose and the tests run.

    python3 docker/k8s_configmap.py           rewrite docker/k8s.yaml
    python3 docker/k8s_configmap.py --check   exit 1 if it is out of date
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
KEY = "  default.conf.template: |\n"


def rendered():
    with open(os.path.join(HERE, "k8s.yaml")) as f:
        text = f.read()
    head = text[:text.index(KEY) + len(KEY)]
    with open(os.path.join(HERE, "nginx.conf")) as f:
        conf = f.read()
    body = "".join("    " + line if line.strip() else "\n"
                   for line in conf.splitlines(keepends=True))
    return text, head + body


def main():
    text, want = rendered()
    if "--check" in sys.argv[1:]:
        if text != want:
            print("docker/k8s.yaml: the ConfigMap differs from docker/nginx.conf; "
                  "run python3 docker/k8s_configmap.py")
            return 1
        return 0
    with open(os.path.join(HERE, "k8s.yaml"), "w") as f:
        f.write(want)
    return 0


if __name__ == "__main__":
    sys.exit(main())

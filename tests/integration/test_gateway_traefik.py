# SPDX-License-Identifier: Apache-2.0
"""examples/traefik is checked for syntax only (Traefik is not in Debian, so it cannot
run here): both files parse as YAML, use only option names Traefik's forwardAuth, router
and service configuration define, point forwardAuth at sluice's /v1/auth, copy the
RateLimit fields, name the route (X-Sluice-Route) and wire the middlewares into the router."""
import os

import yaml

from conftest import SRC

EXAMPLE = os.path.join(SRC, "examples", "traefik")
# Traefik v2.11/v3 forwardAuth options (doc.traefik.io, middlewares/http/forwardauth).
FORWARD_AUTH = {"address", "tls", "trustForwardHeader", "authResponseHeaders",
                "authResponseHeadersRegex", "authRequestHeaders", "addAuthCookiesToResponse",
                "headerField", "forwardBody", "maxBodySize", "preserveLocationHeader",
                "preserveRequestMethod"}


def load(name):
    with open(os.path.join(EXAMPLE, name)) as f:
        return yaml.safe_load(f)


def test_traefik_static_config():
    static = load("traefik.yml")
    assert set(static) == {"entryPoints", "providers"}
    assert static["entryPoints"]["web"]["address"].startswith("127.0.0.1:")
    path = static["providers"]["file"]["filename"]
    assert os.path.exists(os.path.join(SRC, path)), path


def test_traefik_forward_auth_to_sluice():
    http = load("dynamic.yml")["http"]
    assert set(http) == {"middlewares", "routers", "services"}
    fa = http["middlewares"]["sluice"]["forwardAuth"]
    assert set(fa) <= FORWARD_AUTH, set(fa) - FORWARD_AUTH
    assert fa["address"].startswith("http://") and fa["address"].endswith("/v1/auth")
    assert fa["trustForwardHeader"] is False
    assert set(fa["authResponseHeaders"]) == {"RateLimit", "RateLimit-Policy"}
    router = http["routers"]["app"]
    assert set(router) <= {"rule", "entryPoints", "middlewares", "service", "priority", "tls"}
    # the route name first (it also replaces a client's own X-Sluice-Route), then sluice
    assert router["middlewares"] == ["sluice-route-app", "sluice"] and router["service"] in http["services"]
    route = http["middlewares"]["sluice-route-app"]
    assert set(route) == {"headers"} and route["headers"]["customRequestHeaders"] == {"X-Sluice-Route": "app"}
    assert router["entryPoints"] == list(load("traefik.yml")["entryPoints"])
    servers = http["services"][router["service"]]["loadBalancer"]["servers"]
    assert servers and all(s["url"].startswith("http://127.0.0.1:") for s in servers)

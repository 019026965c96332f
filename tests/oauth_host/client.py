"""An MCP client that knows nothing but toolgate's URL: the official MCP Python SDK (`mcp` 2.3)
with its OAuth client provider, against toolgate and the test identity provider
(tests/oidc/provider.mjs).

Usage: client.py MCP_URL USERNAME

The SDK does the discovery, the registration, PKCE and the token exchange itself; this script
supplies only what an application must: in-memory token storage, and the person's browser. The
redirect handler is that browser: an HTTP client with one cookie jar that opens the authorization
URL, follows the provider's redirects to its sign-in form, signs in as USERNAME, follows the
redirects again and stops at the client's redirect URI (nothing listens there), whose `code`,
`state` and `iss` the callback handler hands back to the SDK.

Prints one JSON object of what it saw (every HTTP exchange the SDK made, the authorization URL's
parameters, the registered client, the access token's claims, the tool's answer) for the Rust
test (tests/oauth_host.rs) to check, and exits non-zero, with the reason, on the first
expectation that fails.
"""

import asyncio
import base64
import faulthandler
import json
import sys
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx2
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

MCP_URL, USERNAME = sys.argv[1:3]
# A loopback redirect URI (RFC 8252), as a native MCP client registers one. Nothing listens on it:
# the browser below stops at it and reads the code off the URL.
REDIRECT_URI = "http://127.0.0.1:1/callback"
TIMEOUT = httpx2.Timeout(10.0)

# A hard stop, whatever hangs: every thread's stack on stderr, then exit.
faulthandler.dump_traceback_later(45, exit=True)

seen: dict[str, Any] = {"exchanges": [], "browser": []}


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise SystemExit(f"expectation failed: {what}")


class MemoryStorage:
    """The SDK's TokenStorage, in memory: nothing outlives the run."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


async def record(response: httpx2.Response) -> None:
    """Every response the SDK's HTTP client got, its auth flow's own requests included."""
    request = response.request
    seen["exchanges"].append(
        {
            "method": request.method,
            "url": str(request.url),
            "status": response.status_code,
            "www_authenticate": response.headers.get("www-authenticate"),
            "bearer": request.headers.get("authorization", "").startswith("Bearer "),
        }
    )


class Browser:
    """The person's browser: signs in at the provider and lands on the redirect URI."""

    def __init__(self) -> None:
        self.result: AuthorizationCodeResult | None = None

    async def open(self, authorization_url: str) -> None:
        query = parse_qs(urlsplit(authorization_url).query)
        seen["authorization"] = {key: values[0] for key, values in query.items()}
        async with httpx2.AsyncClient(follow_redirects=False, timeout=TIMEOUT) as browser:
            response = await browser.get(authorization_url)
            signed_in = False
            for _ in range(12):
                self.note(response)
                if response.is_redirect:
                    location = urljoin(str(response.url), response.headers["location"])
                    if location.startswith(REDIRECT_URI + "?"):
                        return self.land(location)
                    response = await browser.get(location)
                elif response.status_code == 200 and 'id="username"' in response.text:
                    expect(not signed_in, "the sign-in form is shown once")
                    signed_in = True
                    action = response.text.split('<form method="post" action="', 1)[1].split('"', 1)[0]
                    response = await browser.post(
                        urljoin(str(response.url), action), data={"username": USERNAME}
                    )
                else:
                    raise SystemExit(f"the browser is stuck at {response.url}: {response.status_code} {response.text}")
            raise SystemExit("the browser never reached the redirect URI")

    def note(self, response: httpx2.Response) -> None:
        seen["browser"].append(
            {"method": response.request.method, "url": str(response.url), "status": response.status_code}
        )

    def land(self, location: str) -> None:
        params = {key: values[0] for key, values in parse_qs(urlsplit(location).query).items()}
        seen["landed"] = {key: params.get(key) is not None for key in ("code", "state", "iss", "error")}
        expect("error" not in params, f"the provider refused: {params}")
        self.result = AuthorizationCodeResult(code=params["code"], state=params.get("state"), iss=params.get("iss"))

    async def callback(self) -> AuthorizationCodeResult:
        expect(self.result is not None, "the browser landed on the redirect URI before the callback")
        return self.result


def claims(jwt: str) -> dict[str, Any]:
    """A JWT's payload, unverified: toolgate verifies it; this only reports what it says."""
    payload = jwt.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


async def main() -> None:
    storage = MemoryStorage()
    browser = Browser()
    oauth = OAuthClientProvider(
        server_url=MCP_URL,
        client_metadata=OAuthClientMetadata(
            client_name="toolgate oauth_host test",
            redirect_uris=[REDIRECT_URI],
        ),
        storage=storage,
        redirect_handler=browser.open,
        callback_handler=browser.callback,
    )
    http = httpx2.AsyncClient(auth=oauth, timeout=TIMEOUT, event_hooks={"response": [record]})
    async with http, Client(streamable_http_client(MCP_URL, http_client=http)) as mcp:
        result = await mcp.call_tool("echo", {"text": "hello through OAuth"})
        answer = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        seen["answer"] = answer
        expect(not result.is_error, f"echo succeeds: {answer}")

    expect(storage.tokens is not None, "the SDK stored a token")
    expect(storage.client_info is not None, "the SDK stored its registration")
    seen["token"] = {
        "claims": claims(storage.tokens.access_token),
        "token_type": storage.tokens.token_type,
        "scope": storage.tokens.scope,
    }
    info = storage.client_info
    seen["client"] = {
        "client_id": info.client_id,
        "has_secret": info.client_secret is not None,
        "token_endpoint_auth_method": info.token_endpoint_auth_method,
        "redirect_uris": [str(uri) for uri in info.redirect_uris or []],
    }
    print(json.dumps(seen))


asyncio.run(asyncio.wait_for(main(), 40))

"""Every error code the plugin, ``svc`` or the sandbox can answer with: what it means, what to do.

The documentation's error page is generated from :data:`CODES` (``docs/hooks/error_codes.py``),
and ``tests/test_error_codes.py`` reads the package's source for the codes it raises (tool
failures, metered-tool blocks, service errors, the sandbox's ``BCK.*`` constants, OAuth errors)
and fails when one has no entry here, so the page cannot drift from the code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Source = Literal["tool", "metered", "client", "svc", "seller", "service", "oauth"]

#: who answers with each kind of code, in the order the page lists them
SOURCES: dict[Source, str] = {
    "tool": "The `svc_*` tools (a chat's tool result: `code`, `message`, `hint`)",
    "metered": "Metered host tools (the block result a chat user's paid tool call gets)",
    "client": "Talking to the service (the tools and `svc`: no answer, or an answer it cannot use)",
    "svc": "`svc`, the command line (`Error: <code>: <message>` on stderr, exit 1)",
    "seller": "A route the plugin sells (the paid endpoint, RouteConfig routes, MCP, A2A, "
    "LangGraph): a buyer's retry with an `Idempotency-Key`",
    "service": "The service and the sandbox (the error envelope `{code, message, hint}`)",
    "oauth": "The sandbox's OAuth server (`error=` in the redirect or the JSON answer)",
}


@dataclass(frozen=True, slots=True)
class Code:
    """One code: who answers with it, what it means, and the next step."""

    source: Source
    meaning: str
    todo: str


def _c(source: Source, meaning: str, todo: str) -> Code:
    return Code(source, meaning, todo)


CODES: dict[str, Code] = {
    # -- the svc_* tools ----------------------------------------------------------------------
    "invalid_params": _c(
        "tool",
        "A parameter is missing, of the wrong type, or unknown (the message names it, and "
        "suggests the nearest name for a typo).",
        "Fix the named field and call again.",
    ),
    "internal_error": _c(
        "tool",
        "The tool failed in a way the plugin did not expect (a bug).",
        "Try again; if it keeps failing, report it with the gateway's log.",
    ),
    "plugin_closed": _c(
        "tool",
        "The plugin was shutting down when the call arrived.",
        "Call again once the gateway has restarted.",
    ),
    "plugin_misconfigured": _c(
        "tool",
        "The plugin's configuration is invalid, so no tool can run; the message names the setting.",
        "Fix the setting in the plugin config and restart the gateway.",
    ),
    "internal": _c(
        "tool",
        "AstrBot: the plugin failed unexpectedly while answering a tool call.",
        "Try again; if it keeps failing, report it with AstrBot's log.",
    ),
    "unavailable": _c(
        "tool",
        "Hermes: the plugin was shut down, so its tools cannot run.",
        "Restart the gateway to use the svc tools again.",
    ),
    "unknown_input": _c(
        "tool",
        "The reference chat: the line is neither a /command nor a tool name.",
        "Type /tools to list the tools, /help for the commands.",
    ),
    "invalid_json": _c(
        "tool",
        "The reference chat: a tool's parameters are not a JSON object.",
        'Write them as JSON after the tool name, e.g. svc_checkBalance {"planId": "1"}.',
    ),
    "host": _c(
        "tool",
        "The reference chat could not handle the line (the message names the error).",
        "Try again; if it repeats, report it with the line you typed.",
    ),
    "unknown_tool": _c(
        "tool",
        "No tool of that name (a host tool, or a tool the MCP server does not list).",
        "Check the name: the error lists the tools there are.",
    ),
    "not_your_account": _c(
        "tool",
        "The address asked about is not the logged-in account's, and only your own is shown.",
        "Leave the address out to use your own account.",
    ),
    "missing_plan_id": _c(
        "tool",
        "No plan could be chosen: the agent sells several plans, or none.",
        "Pass planId (svc_queryAgent's 402 answer and the agent's card name its plans).",
    ),
    "payment_type_mismatch": _c(
        "tool",
        "paymentType says crypto for a card-paid plan, or fiat for a crypto plan.",
        "Leave paymentType out to follow the plan, or pass the plan's own.",
    ),
    "fiat_plan": _c(
        "tool",
        "svc_orderPlan was asked to buy a plan paid by card.",
        "Use svc_orderFiatPlan for it: it gives you your own checkout link.",
    ),
    "crypto_plan": _c(
        "tool",
        "svc_orderFiatPlan was asked to buy a plan paid in crypto.",
        "Use svc_orderPlan for it.",
    ),
    "payment_required": _c(
        "tool",
        "The agent answered 402 (payment required) to the payment sent: too few credits, or "
        "the token was refused. Nothing was charged.",
        "Check svc_checkBalance; buy the plan (svc_orderPlan) or allow the top-up "
        "(/svc_allow), then ask again.",
    ),
    "unknown_agent": _c(
        "tool",
        "The service knows no agent with that id; nothing was paid.",
        "Check agentId, or ask the agent's owner for it.",
    ),
    "agent_url_not_registered": _c(
        "tool",
        "The URL is not one of the endpoints the agent registered, so a payment for it "
        "would be refused; nothing was paid.",
        "Use a URL the agent registered (its owner adds new ones to the agent's endpoints).",
    ),
    "agent_unreachable": _c(
        "tool",
        "The agent's URL could not be reached (refused, DNS, TLS); nothing was paid.",
        "Check the URL and that the agent is running, then ask again.",
    ),
    "agent_timeout": _c(
        "tool",
        "The agent did not answer within the deadline; a payment settled only for an "
        "answer, so nothing was charged for this one.",
        "Ask again later, or raise agentTimeoutSecs.",
    ),
    "service_timeout": _c(
        "tool",
        "The payments service did not answer in time while paying; nothing was charged.",
        "Ask again in a minute.",
    ),
    "agent_error": _c(
        "tool",
        "The agent answered with an error (not a 402); the message quotes it as data.",
        "Read the agent's message; fix the prompt or ask its owner.",
    ),
    "answer_too_large": _c(
        "tool",
        "The agent's answer was larger than maxAnswerBytes, so it was cut off.",
        "Ask for a shorter answer, or raise maxAnswerBytes.",
    ),
    "insecure_agent_url": _c(
        "tool",
        "The agent's URL is plain http to a host that is not loopback; a token would travel "
        "in clear. Nothing was paid.",
        "Use the agent's https URL.",
    ),
    "private_agent_address": _c(
        "tool",
        "The agent's URL resolves to a private or link-local address, which the buyer "
        "refuses to pay; nothing was paid.",
        "Use a public URL, or list the host in allowedAgentHosts if you trust it.",
    ),
    "agent_mismatch": _c(
        "tool",
        "The agent card at the URL names another agentId than the one given.",
        "Check agentId against the agent's card, or leave it out to use the card's.",
    ),
    "scheme_not_accepted": _c(
        "tool",
        "The agent's card accepts no payment in the plan's scheme (crypto or card).",
        "Pay with a plan this agent accepts, or pass paymentType to match it.",
    ),
    "agent_card_invalid": _c(
        "tool",
        "The A2A agent card could not be read as a card; nothing was paid.",
        "Check the agent's URL; its owner fixes the card.",
    ),
    "agent_card_unpaid": _c(
        "tool",
        "The A2A agent's card declares no x402 payment extension; nothing was paid.",
        "This agent does not sell through the Agent Payments Service.",
    ),
    "plan_not_sold": _c(
        "tool",
        "The A2A agent does not sell the plan named (or the plans its card names).",
        "Pass one of the plans the agent's card names.",
    ),
    "a2a_unavailable": _c(
        "tool",
        "The agent speaks A2A, and paying it needs a2a-sdk 1.x, which is not installed.",
        "Install the a2a extra (from a checkout: pip install -e '.[a2a]').",
    ),
    "approvals_unavailable": _c(
        "tool",
        "The person's mandates (/svc_allow) could not be read (the shared state is "
        "unreachable), so nothing that needs them is paid.",
        "Try again in a minute; the gateway's operator checks stateUrl.",
    ),
    "state_unavailable": _c(
        "tool",
        "The shared state (Redis at stateUrl) could not be reached.",
        "Check that Redis at stateUrl runs and is reachable; retry.",
    ),
    # -- metered host tools -------------------------------------------------------------------
    "approval_required": _c(
        "metered",
        "The paid tool call needs the person's approval (it costs credits, and maybe buys "
        "the plan); the result holds a code.",
        "The person types /svc_approve <code> (or sets /svc_allow), then the tool is called again.",
    ),
    "insufficient_credits": _c(
        "metered",
        "The caller's balance on the tool's plan is below the call's price; the tool did "
        "not run and nothing was charged.",
        "Buy credits for the plan (svc_orderPlan; svc_orderFiatPlan for a card plan), or "
        "allow the top-up with /svc_allow, then call again.",
    ),
    "not_logged_in": _c(
        "metered",
        "No API key is logged in (a paid tool, a tool that needs an account, or `svc` "
        "with no profile).",
        "Log in with /svc_login (svc: svc login <env>:<API_KEY>, or set SVC_API_KEY).",
    ),
    "metering_not_configured": _c(
        "metered",
        "The tool is metered, but the gateway names no plan to charge it on.",
        "The gateway's operator sets meteringPlanId (or planId).",
    ),
    "metering_unavailable": _c(
        "metered",
        "The meter could not run (the plugin is not started, or the host gave no caller).",
        "Try again; if it keeps failing, tell the gateway's operator.",
    ),
    "metering_failed": _c(
        "metered",
        "The call could not be metered; the tool did not run and nothing was charged.",
        "Try again; if it keeps failing, tell the gateway's operator.",
    ),
    "price_unavailable": _c(
        "metered",
        "The tool's price function failed; the tool did not run and nothing was charged.",
        "Try again; the gateway's operator checks the meteredTools price function.",
    ),
    "payment_refused": _c(
        "metered",
        "The tool ran, but the service refused the payment, so its result is withheld.",
        "Check your balance (svc_checkBalance), buy credits, and call again.",
    ),
    "tool_failed": _c(
        "metered",
        "The host's tool failed; nothing was charged and its output is not passed on.",
        "Fix the call and try again.",
    ),
    "tool_timeout": _c(
        "metered",
        "The host's tool ran past its deadline; nothing was charged.",
        "Try again, or ask the operator to raise handlerTimeoutSecs.",
    ),
    # -- talking to the service ---------------------------------------------------------------
    "network_error": _c(
        "client",
        "The service could not be reached (connection refused, DNS, TLS); the message names "
        "the URL.",
        "Check baseUrl (or the environment) and your network; a local sandbox must be "
        "running (svc-gateway sandbox).",
    ),
    "timeout": _c(
        "client",
        "The service did not answer within requestTimeoutSecs.",
        "Try again; raise requestTimeoutSecs if the service is slow.",
    ),
    "http_<status>": _c(
        "client",
        "The service answered an HTTP error without a code of its own (e.g. http_502).",
        "Retry a 5xx later; for a 4xx fix what the message names.",
    ),
    "bad_response": _c(
        "client",
        "The service's answer was not the JSON expected (a proxy's page, a wrong baseUrl).",
        "Check baseUrl: it ends in /api/v1 (the service's API root).",
    ),
    "key_expired": _c(
        "client",
        "The API key's expiry has passed; nothing was sent.",
        "Create a new key in the dashboard and log in with it.",
    ),
    "bad_onboarding": _c(
        "client",
        "The browser login's answer carried no usable key.",
        "Log in again, or paste a key: /svc_login <env>:<API_KEY>.",
    ),
    "order_failed": _c(
        "client",
        "The service did not accept the order (the message says why).",
        "Read the message; check the plan and your balance, then order again.",
    ),
    "no_checkout_url": _c(
        "client",
        "The card order's answer held no checkout link.",
        "Order again; if it repeats, the service is at fault.",
    ),
    "order_limit_unsupported": _c(
        "client",
        "A plan with an order limit was asked of a service version that cannot store one.",
        "Leave the order limit out, or cap sales with a credits or trial plan.",
    ),
    "payment_method_not_found": _c(
        "client",
        "The card named is not one of the account's payment methods.",
        "List your cards with svc_listPaymentMethods.",
    ),
    "no_payment_method": _c(
        "client",
        "A card payment was asked for, and the account has no card enrolled.",
        "Enroll a card in the dashboard, or pay with crypto.",
    ),
    # -- svc ----------------------------------------------------------------------------------
    "key_refused": _c(
        "svc",
        "svc login (or config init --api-key): the service refused the key; nothing was stored.",
        "Copy the key again from the service's API keys page (or svc config init --from-sandbox "
        "offline) and log in again.",
    ),
    "no_payment_required": _c(
        "svc",
        "svc pay: the URL did not answer 402 with a payment-required envelope naming a plan; "
        "nothing was paid.",
        "Check that the URL is the paid route (the agent's registered endpoint) and its method.",
    ),
    "over_max_price": _c(
        "svc",
        "svc pay: the price is more than --max-price; nothing was paid.",
        "Raise --max-price if you mean to pay that much, or leave it out to be asked.",
    ),
    "not_confirmed": _c(
        "svc",
        "svc pay: the price was shown and not confirmed (or no terminal could ask); nothing was "
        "paid.",
        "Answer y at the prompt, or pass --yes or --max-price AMOUNT to approve in advance.",
    ),
    "idempotency_key_reused": _c(
        "seller",
        "422: the idempotency key was used for another request (method, route or body), or "
        "belongs to another payer's payment; nothing was charged.",
        "Send a new key for a new request; a retry sends the same key, token and body.",
    ),
    "idempotency_key_in_use": _c(
        "seller",
        "409: the first request with this key is still running; nothing more was charged.",
        "Retry with the same key and token after Retry-After seconds for its answer.",
    ),
    "idempotency_key_invalid": _c(
        "seller",
        "400: the Idempotency-Key is empty, too long, or has characters other than letters, "
        "digits and - _ . : ~ + / =; nothing was charged.",
        "Send a UUID (or any key of those characters), the same on every retry.",
    ),
    "idempotency_answer_not_kept": _c(
        "seller",
        "410: the request was paid once, but its answer was larger than the seller keeps for "
        "retries (or was a stream, sent as it came); the receipt is in payment-response.",
        "Nothing more was charged; ask again with a new key if you need the answer again.",
    ),
    "invalid_token": _c(
        "seller",
        "401 from a paid MCP server: the request carries no bearer token (an MCP client starts "
        "its OAuth login from WWW-Authenticate's resource_metadata).",
        "Send Authorization: Bearer <access token> (svc_getAccessToken for the agent's plan), "
        "or let the client log in through OAuth.",
    ),
    "not_found": _c(
        "seller",
        "404 from a paid MCP server: no route at that path (the MCP endpoint is /mcp).",
        "Use the URL the agent registered (its mcp endpoint), e.g. http://host:port/mcp.",
    ),
    "temporarily_unavailable": _c(
        "oauth",
        "The authorization server cannot take the request now (the sandbox holds too many "
        "pending consents, or the paid MCP server cannot read the service's metadata).",
        "Try again in a minute; if it lasts, check that the service is reachable.",
    ),
    "invalid_payment": _c(
        "svc",
        "svc verify: the service says the token cannot pay (the message gives its reason).",
        "Get a fresh token for the plan (svc get-x402-access-token) and verify again.",
    ),
    "settle_failed": _c(
        "svc",
        "svc settle: the service did not burn the credits (the message gives its reason).",
        "Check the token's balance; settle again with the same agentRequestId.",
    ),
    "refused": _c(
        "svc",
        "The service's answer said no, without a code of its own.",
        "Read the message; fix what it names.",
    ),
    # -- the service and the sandbox ----------------------------------------------------------
    "BCK.APIKEY.0004": _c(
        "service",
        "The API key is missing, invalid, revoked, or for another environment.",
        "Log in with a valid key (/svc_login; svc login); a sandbox key works only in its "
        "own sandbox.",
    ),
    "BCK.VERSION.0001": _c(
        "service",
        "The Service-Version sent is unknown or unsupported.",
        "Set apiVersion to a version the service supports (GET /meta/versions lists them).",
    ),
    "BCK.COMMON.0001": _c("service", "The request body is not valid JSON.", "Send a JSON body."),
    "BCK.COMMON.0002": _c(
        "service",
        "A field is missing or invalid (the message names it).",
        "Fix the named field and send again (the sandbox's /docs lists the fields).",
    ),
    "BCK.COMMON.0003": _c("service", "A query parameter is invalid.", "Fix the named parameter."),
    "BCK.COMMON.0004": _c(
        "service",
        "No such route. Most often a baseUrl without /api/v1, or a misspelt path.",
        "Make baseUrl end in /api/v1; the sandbox's /docs lists its routes.",
    ),
    "BCK.COMMON.0005": _c(
        "service", "The route does not take that HTTP method.", "Use the method /docs lists."
    ),
    "BCK.COMMON.0013": _c("service", "The request body is over 1 MiB.", "Send a smaller body."),
    "BCK.COMMON.0026": _c(
        "service",
        "A big integer was sent as a JSON number and lost precision.",
        "Send amounts and ids as decimal strings.",
    ),
    "BCK.COMMON.0500": _c(
        "service",
        "The sandbox failed unexpectedly (a bug).",
        "Retry once, then report the request that caused it.",
    ),
    "BCK.PROTOCOL.0001": _c(
        "service",
        "No plan with that id.",
        "Check the plan id (GET /protocol/plans lists yours, an agent's /plans its).",
    ),
    "BCK.PROTOCOL.0002": _c(
        "service", "No agent with that id.", "Check the agent id (GET /protocol/agents)."
    ),
    "BCK.PROTOCOL.0003": _c(
        "service",
        "Only the owner of the plan or agent may do that.",
        "Use the key of the account that owns it.",
    ),
    "BCK.PROTOCOL.0004": _c(
        "service",
        "The plan is not one of the agent's plans.",
        "Use one of the agent's plans (GET /protocol/agents/{agentId}/plans).",
    ),
    "BCK.PROTOCOL.0010": _c(
        "service", "The plan's price is invalid.", "Fix priceConfig as the message says."
    ),
    "BCK.PROTOCOL.0011": _c(
        "service", "The plan's credits are invalid.", "Fix creditsConfig as the message says."
    ),
    "BCK.PROTOCOL.0012": _c(
        "service",
        "A card-paid plan cannot be ordered with crypto.",
        "Order it by card (svc_orderFiatPlan: a checkout link).",
    ),
    "BCK.PROTOCOL.0013": _c(
        "service",
        "A crypto plan cannot be ordered by card.",
        "Order it with crypto (svc_orderPlan).",
    ),
    "BCK.PROTOCOL.0031": _c(
        "service",
        "The URL paid for is not one of the agent's registered endpoints.",
        "Pay the URL the agent registered; its owner adds new ones to the agent.",
    ),
    "BCK.PROTOCOL.0047": _c(
        "service",
        "A card price below the service's minimum.",
        "Raise the price to at least the minimum the message names.",
    ),
    "BCK.PROTOCOL.0048": _c(
        "service", "This account already used the plan's trial.", "Choose a paid plan."
    ),
    "BCK.PROTOCOL.0049": _c(
        "service", "The plan sold all the orders it allows.", "Choose another plan."
    ),
    "BCK.PROTOCOL.0050": _c(
        "service",
        "The balance is below the credits asked for (verify or settle).",
        "Buy the plan again (svc_orderPlan), or let the delegation top up.",
    ),
    "BCK.FIAT.0001": _c("service", "No card checkout with that id.", "Start the card order again."),
    "BCK.FIAT.0002": _c("service", "The card checkout expired.", "Start the card order again."),
    "BCK.PAYMENT.0001": _c(
        "service",
        "The payment method named does not exist.",
        "List your cards (svc_listPaymentMethods) and use one of them.",
    ),
    "BCK.MPP.0002": _c(
        "service",
        "MPP payments are not configured on this deployment.",
        "Pay with the x402 schemes (svc:erc4337 or svc:card-delegation).",
    ),
    "BCK.DELEGATION.0001": _c(
        "service",
        "A card delegation needs the person's consent in a browser.",
        "Open the link the answer gives, approve, then retry.",
    ),
    "BCK.DELEGATION.0002": _c(
        "service", "The delegation's settings are invalid.", "Fix the field the message names."
    ),
    "BCK.X402.0002": _c(
        "service",
        "The x402 paymentRequired envelope is invalid.",
        "Send the envelope the 402 answer gave, unchanged.",
    ),
    "BCK.X402.0013": _c(
        "service", "The delegation behind the token expired.", "Get a new token (a new delegation)."
    ),
    "BCK.X402.0023": _c(
        "service",
        "The delegation cannot pay: its spending limit, transaction count or currency is used up.",
        "Approve a new purchase (/svc_approve, /svc_allow) or create a new delegation.",
    ),
    "BCK.X402.0030": _c(
        "service",
        "The token's plan needs a delegation, and none was given.",
        "Get the token with a delegation (svc_getAccessToken makes one).",
    ),
    "BCK.X402.0032": _c(
        "service", "No delegation with that id.", "List yours (GET /delegation) and use one."
    ),
    "BCK.X402.0033": _c(
        "service", "The delegation belongs to another account.", "Use one of your own."
    ),
    "BCK.X402.0034": _c(
        "service",
        "The scheme does not match the delegation's provider.",
        "Use svc:erc4337 with a crypto delegation, svc:card-delegation with a card one.",
    ),
    "BCK.X402.0035": _c(
        "service",
        "The scheme does not match the plan (a card plan paid with crypto, or the reverse).",
        "Pass paymentType fiat for a card plan, crypto for a crypto plan, or leave it out.",
    ),
    "BCK.X402.0036": _c(
        "service",
        "The agent does not sell that plan.",
        "Leave planId out to use the agent's plan, or pass one of its plans.",
    ),
    "BCK.X402.0037": _c(
        "service",
        "The delegation is bound to another plan.",
        "Create a delegation without planId, or one for this plan.",
    ),
    "BCK.X402.0040": _c(
        "service",
        "No verified request with that agentRequestId.",
        "Verify first; settle with the agentRequestId verify returned.",
    ),
    "BCK.X402.0041": _c(
        "service",
        "The agentRequestId was verified for another token or plan.",
        "Send the agentRequestId verify returned for this token.",
    ),
    "BCK.X402.0043": _c(
        "service",
        "The request for an access token is invalid (the message names the field).",
        "Fix the field and ask again.",
    ),
    "BCK.X402.0059": _c(
        "service",
        "A single-use (v3) token was settled already.",
        "Get a new token for each call (svc_getAccessToken).",
    ),
    # -- the sandbox's OAuth server -----------------------------------------------------------
    "invalid_request": _c(
        "oauth", "The OAuth request lacks a parameter or has a bad one.", "Fix the named one."
    ),
    "invalid_client": _c(
        "oauth",
        "The client is unknown or its secret is wrong.",
        "Register the client again (POST /register).",
    ),
    "invalid_client_metadata": _c(
        "oauth",
        "The client's registration metadata is invalid.",
        "Fix the field the description names and register again.",
    ),
    "invalid_redirect_uri": _c(
        "oauth",
        "The redirect URI was not registered for this client.",
        "Use a redirect URI the client registered.",
    ),
    "invalid_grant": _c(
        "oauth",
        "The code or refresh token is invalid, used, or expired, or the PKCE verifier is wrong.",
        "Start the authorization again.",
    ),
    "invalid_target": _c(
        "oauth",
        "The resource (the MCP server's URL) is not among the agent's registered endpoints.",
        "The seller adds the server's URL (…/mcp) to the agent's endpoints.",
    ),
    "unsupported_grant_type": _c(
        "oauth",
        "The grant type is not supported.",
        "Use grant_type=authorization_code.",
    ),
    "unsupported_response_type": _c(
        "oauth", "The response type is not supported.", "Use response_type=code."
    ),
    "server_error": _c(
        "oauth",
        "Approve was chosen, but the plan cannot be paid for (the sandbox could not grant "
        "the token its spending).",
        "Check the plan's price and the subscriber's account, then start again.",
    ),
    "access_denied": _c(
        "oauth",
        "The person chose Deny on the consent page; nothing can be paid.",
        "Start again and choose Approve, if you mean to pay.",
    ),
}

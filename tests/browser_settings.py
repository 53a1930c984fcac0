"""Settings for `make test-browser`: the test settings plus a strict Content-Security-Policy.

Scripts only from the site's own static files (no inline script, no ``eval``): a page that
breaks the policy logs a console error in Chromium, and the browser tests fail on any console
error. Inline ``style`` attributes stay allowed (the admin's badges and bars use them).
"""

from django.utils.csp import CSP

from tests.settings import *  # noqa: F403
from tests.settings import MIDDLEWARE

MIDDLEWARE = [*MIDDLEWARE, "django.middleware.csp.ContentSecurityPolicyMiddleware"]
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF, CSP.UNSAFE_INLINE],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
}

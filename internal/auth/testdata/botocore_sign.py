# Signs one request with botocore's SigV4Auth and prints the resulting
# headers as JSON. Input (stdin, JSON): method, url, body, headers,
# access_key, secret_key, service, region.
import json
import sys

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

inp = json.load(sys.stdin)
req = AWSRequest(
    method=inp["method"],
    url=inp["url"],
    data=inp["body"].encode(),
    headers=inp["headers"],
)
creds = Credentials(inp["access_key"], inp["secret_key"])
SigV4Auth(creds, inp["service"], inp["region"]).add_auth(req)
json.dump(dict(req.headers.items()), sys.stdout)

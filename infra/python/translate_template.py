"""Translates template.yaml from SAM to plain CloudFormation, offline.

`sam validate --lint` misses SAM-level mistakes (an event on a missing
queue, a policy template with a wrong parameter); translating with
aws-sam-translator surfaces them, and cfn-lint then checks the result.
The managed-policy loader answers from an empty map instead of calling IAM:
the template names no AWS managed policy.

Usage: python translate_template.py template.yaml > translated.json
"""

import json
import os
import sys

# The translator reads the pseudo parameters' region from boto's session.
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator
from samtranslator.yaml_helper import yaml_parse


class OfflinePolicyLoader:
    def load(self):
        return {}


def main(path):
    with open(path) as f:
        template = yaml_parse(f.read())
    # As `sam package` would: local code becomes an S3 location.
    for name, resource in template.get("Resources", {}).items():
        props = resource.get("Properties", {})
        if resource.get("Type") == "AWS::Serverless::Function" and not str(props.get("CodeUri", "")).startswith("s3://"):
            props["CodeUri"] = f"s3://packaged-code/{name}.zip"
    translated = Translator(OfflinePolicyLoader(), Parser()).translate(
        sam_template=template,
        parameter_values={"AWS::Region": "us-east-1", "AWS::AccountId": "123456789012", "AWS::Partition": "aws"},
    )
    json.dump(translated, sys.stdout, indent=1, default=str)


if __name__ == "__main__":
    main(sys.argv[1])

//! What `infra/python/moto_serial.py` changes in moto's server, held where
//! it is cheapest to see: in the server's own Python, through werkzeug's
//! test client, with no port.

use std::process::Command;

/// moto routes each request by asking whether its host names a service
/// package, and listed its package folder for every request to answer;
/// behind `moto_serial.py` the folder is listed once, when the script
/// loads, and requests are routed as before (a secret written and read
/// back). The count is of `os.listdir` calls on moto's folder while four
/// requests are served.
#[test]
fn moto_lists_its_package_folder_once_not_per_request() {
    let script = r#"
import json, os, sys
sys.path.insert(0, "infra/python")
import moto
import moto_serial
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.test import Client

folder = os.path.dirname(moto.__file__)
listed = []
listdir = os.listdir
def counted(path="."):
    if os.path.abspath(path) == folder:
        listed.append(path)
    return listdir(path)
os.listdir = counted
client = Client(moto_serial.Serial(DomainDispatcherApplication(create_backend_app)))
def call(target, body):
    return client.post("/", data=body, headers={
        "Host": "127.0.0.1:5000",
        "X-Amz-Target": "secretsmanager." + target,
        "Content-Type": "application/x-amz-json-1.1",
        "Authorization": "AWS4-HMAC-SHA256 Credential=test/20261206/us-east-1/secretsmanager/aws4_request, "
        "SignedHeaders=host, Signature=0",
    })
answers = [call("CreateSecret", '{"Name": "s", "SecretString": "v"}')]
answers += [call("GetSecretValue", '{"SecretId": "s"}') for _ in range(3)]
print(json.dumps({
    "statuses": [a.status_code for a in answers],
    "value": json.loads(answers[-1].get_data()).get("SecretString"),
    "listed": len(listed),
}))
"#;
    let out = Command::new(local::moto::python_path())
        .current_dir(local::moto::repo_root())
        .args(["-c", script])
        .output()
        .expect("the venv's python runs");
    assert!(
        out.status.success(),
        "the check failed to run: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert_eq!(answer["statuses"], serde_json::json!([200, 200, 200, 200]), "{answer}");
    assert_eq!(answer["value"], "v", "the secret read back: {answer}");
    assert_eq!(
        answer["listed"], 0,
        "moto listed its package folder while serving requests: {answer}"
    );
}

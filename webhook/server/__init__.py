"""The admission webhook's server: the Flask app (decode an AdmissionReview, call the rules,
encode the answer), gunicorn with TLS, the slow-client and fair-share worker, the serving
certificate, its metrics."""
